from sparkserve_lab.cli.main import main

raise SystemExit(main())
