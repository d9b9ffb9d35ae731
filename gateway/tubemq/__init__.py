"""The pooled asyncio TubeMQ client core."""
