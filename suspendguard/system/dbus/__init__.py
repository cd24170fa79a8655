"""logind and systemd over the system D-Bus: the one package that knows dbus-next.

:mod:`.bus` holds the connection (and is the only module importing
dbus-next); :mod:`.logind` and :mod:`.systemd` (with :mod:`.transient`, the
transient units made again) ask their service and turn the answers into
frozen dataclasses. Callers see a synchronous API and an
:class:`~suspendguard.model.Unavailable` value, never an exception.
"""
