"""suspendguard: a pre-suspend guard for accelerator hosts."""

__version__ = "0.1.0"
