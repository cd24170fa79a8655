"""Telling the person who asked to sleep that the guard refused: desktops and terminals.

``tell`` (the users told, the message, the bound) runs once the unit's run
has logged its verdict; ``send`` is the child it starts as each user to reach
that user's notification server; ``terminals`` writes the message to the
users' login terminals. Nothing here changes a verdict or raises: a failure
is one warning line.
"""
