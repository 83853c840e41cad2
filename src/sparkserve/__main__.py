from sparkserve.cli import main

raise SystemExit(main())
