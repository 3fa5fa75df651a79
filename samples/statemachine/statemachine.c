/*
 * A small lexer as a state machine over a byte buffer.  Tokens:
 *
 *   identifier  [A-Za-z_][A-Za-z0-9_]*
 *   number      [0-9]+ ( '.' [0-9]* )?
 *   string      '"' ( '\' any-byte | any byte but '"' and '\' )* '"'   (may be cut off by the end)
 *   comment     '#' up to, not including, the next newline
 *   operator    one of + - * / % < > = ! & | ^ ~ ; , : ? ( ) { } [ ] .  optionally followed by '='
 *   error       a run of bytes that start nothing else (control bytes, bytes >= 0x80, @ $ ` ' \ ...)
 *
 * Blanks (space, tab, CR, VT, FF, newline) separate tokens.  The result is a hash of
 * the token sequence: h = h * 33 + (kind << 6 | min(length, 63)) for each token.
 *
 * Analysis sample: `switch (state)` has nine dense cases, which gcc compiles to an
 * indirect jump through a table in .rodata.  At -O2 gcc's jump threading turns the
 * "stay in this state" paths (the rest of an identifier, a number, a string...) into
 * a tight loop per state that bypasses the switch; the state after a token ends is
 * looked up in a table (start_state), which the compiler cannot resolve, so the byte
 * after every token and every blank byte dispatch through the jump table.  At -O0
 * every byte does.
 */

enum cls { C_OTHER, C_BLANK, C_NEWLINE, C_ALPHA, C_DIGIT, C_DOT, C_QUOTE, C_HASH, C_OP };

enum state { S_BLANK, S_IDENT, S_NUMBER, S_FRACTION, S_STRING, S_ESCAPE, S_COMMENT,
             S_OPERATOR, S_ERROR };

enum kind { T_IDENT = 1, T_NUMBER, T_STRING, T_COMMENT, T_OPERATOR, T_ERROR };

#define R4(v) v, v, v, v
#define R8(v) R4(v), R4(v)
#define R16(v) R8(v), R8(v)
#define R32(v) R16(v), R16(v)

/* character class of every byte value */
static const unsigned char byte_class[256] = {
    /* 0x00 */ R8(C_OTHER), C_OTHER, C_BLANK, C_NEWLINE, C_BLANK, C_BLANK, C_BLANK,
               C_OTHER, C_OTHER,
    /* 0x10 */ R16(C_OTHER),
    /* 0x20  ' ' ! " # $ % & ' */
    C_BLANK, C_OP, C_QUOTE, C_HASH, C_OTHER, C_OP, C_OP, C_OTHER,
    /* ( ) * + , - . / */
    C_OP, C_OP, C_OP, C_OP, C_OP, C_OP, C_DOT, C_OP,
    /* 0-9 */ R8(C_DIGIT), C_DIGIT, C_DIGIT,
    /* : ; < = > ? */
    C_OP, C_OP, C_OP, C_OP, C_OP, C_OP,
    /* @ A-O */ C_OTHER, R8(C_ALPHA), R4(C_ALPHA), C_ALPHA, C_ALPHA, C_ALPHA,
    /* P-Z */ R8(C_ALPHA), C_ALPHA, C_ALPHA, C_ALPHA,
    /* [ \ ] ^ _ */ C_OP, C_OTHER, C_OP, C_OP, C_ALPHA,
    /* ` a-o */ C_OTHER, R8(C_ALPHA), R4(C_ALPHA), C_ALPHA, C_ALPHA, C_ALPHA,
    /* p-z */ R8(C_ALPHA), C_ALPHA, C_ALPHA, C_ALPHA,
    /* { | } ~ DEL */ C_OP, C_OP, C_OP, C_OP, C_OTHER,
    /* 0x80-0xff */ R32(C_OTHER), R32(C_OTHER), R32(C_OTHER), R32(C_OTHER),
};

/* the state a byte of each class puts the lexer in when no token is open */
static const unsigned char start_state[9] = {
    [C_OTHER] = S_ERROR, [C_BLANK] = S_BLANK, [C_NEWLINE] = S_BLANK,
    [C_ALPHA] = S_IDENT, [C_DIGIT] = S_NUMBER, [C_DOT] = S_OPERATOR,
    [C_QUOTE] = S_STRING, [C_HASH] = S_COMMENT, [C_OP] = S_OPERATOR,
};

/* the kind of token left open in each state when the input ends */
static const unsigned char open_kind[9] = {
    [S_BLANK] = 0, [S_IDENT] = T_IDENT, [S_NUMBER] = T_NUMBER, [S_FRACTION] = T_NUMBER,
    [S_STRING] = T_STRING, [S_ESCAPE] = T_STRING, [S_COMMENT] = T_COMMENT,
    [S_OPERATOR] = T_OPERATOR, [S_ERROR] = T_ERROR,
};

#define EMIT(kind) (hash = hash * 33u + ((unsigned)(kind) << 6 | (length < 63 ? length : 63)))

unsigned sm_lex(const unsigned char *buf, int len)
{
    unsigned state = S_BLANK;
    unsigned hash = 0;
    unsigned length = 0;      /* bytes of the open token so far */

    for (int i = 0; i < len; i++) {
        unsigned c = buf[i];
        unsigned k = byte_class[c];

        switch (state) {
        case S_BLANK:
            break;                                   /* c starts something new */
        case S_IDENT:
            if (k == C_ALPHA || k == C_DIGIT) {
                length++;
                continue;
            }
            EMIT(T_IDENT);
            break;
        case S_NUMBER:
            if (k == C_DIGIT) {
                length++;
                continue;
            }
            if (k == C_DOT) {
                length++;
                state = S_FRACTION;
                continue;
            }
            EMIT(T_NUMBER);
            break;
        case S_FRACTION:
            if (k == C_DIGIT) {
                length++;
                continue;
            }
            EMIT(T_NUMBER);
            break;
        case S_STRING:
            length++;
            if (c == '"') {                          /* the closing quote is part of it */
                EMIT(T_STRING);
                state = S_BLANK;
            } else if (c == '\\') {
                state = S_ESCAPE;
            }
            continue;
        case S_ESCAPE:
            length++;                                /* any byte, even '"' or newline */
            state = S_STRING;
            continue;
        case S_COMMENT:
            if (k != C_NEWLINE) {
                length++;
                continue;
            }
            EMIT(T_COMMENT);
            break;
        case S_OPERATOR:
            if (c == '=') {                          /* two-byte operator: +=, ==, .= ... */
                length++;
                EMIT(T_OPERATOR);
                state = S_BLANK;
                continue;
            }
            EMIT(T_OPERATOR);
            break;
        case S_ERROR:
            if (k == C_OTHER) {
                length++;
                continue;
            }
            EMIT(T_ERROR);
            break;
        }
        /* c is the first byte of whatever comes next */
        state = start_state[k];
        length = 1;
    }

    if (open_kind[state] != 0)
        EMIT(open_kind[state]);
    return hash;
}
