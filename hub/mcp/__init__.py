"""`skyhub mcp ENV_ID`: an env served over the Model Context Protocol (the official `mcp`
SDK, extra `skyhub[mcp]`); the server is `skyhub.mcp.server`. Importing this package imports
nothing: `import skyhub` never needs the SDK."""
