"""The standing fault suite: each test is one attack or fault that once got the guard wrong."""
