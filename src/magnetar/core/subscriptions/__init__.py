"""Subscriptions: cursors, acknowledged positions, consumers and cursor moves."""
