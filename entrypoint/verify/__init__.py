"""The client that checks a running server the way its clients use it."""
