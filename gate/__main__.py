from gate.cli import main

raise SystemExit(main())
