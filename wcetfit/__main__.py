from wcetfit.cli import main

raise SystemExit(main())
