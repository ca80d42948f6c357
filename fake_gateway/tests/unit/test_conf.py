"""The fake gateway carries its settings' defaults (fake_gateway/conf.py): a project that sets none runs it."""

from fake_gateway import conf


def test_a_project_that_sets_none_of_them_gets_the_defaults(settings):
    for name in conf.DEFAULTS:
        if hasattr(settings, name):
            delattr(settings, name)
    assert {name: conf.setting(name) for name in conf.DEFAULTS} == conf.DEFAULTS
