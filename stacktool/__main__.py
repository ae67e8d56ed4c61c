from stacktool.cli import main

raise SystemExit(main())
