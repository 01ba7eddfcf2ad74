"""The client side: stdio and HTTP front doors, sessions, and the agents behind them."""
