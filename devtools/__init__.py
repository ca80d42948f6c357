"""The monolith's development tooling, never shipped in a service: the scaffolder (``startcontext``) and the
import contracts' generator (``import_contracts``). The monolith's ``config/settings.py`` installs it."""
