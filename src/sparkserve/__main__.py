from sparkserve.cli.main import main

raise SystemExit(main())
