from mcp_loop_guard.cli import main

raise SystemExit(main())
