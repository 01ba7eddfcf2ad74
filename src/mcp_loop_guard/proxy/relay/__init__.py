"""Between the two sides: judging tools/call, rewriting answers, routing, and the message relay itself."""
