"""One module per benchmark area (`scripts/bench --only NAME`); each has `async def run`."""
