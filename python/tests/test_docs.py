"""The docstrings' examples run, and help() documents the functions."""

import knng


def test_docstring_examples():
    import doctest

    import knng._api
    import knng.neighbors

    for module in (knng._api, knng.neighbors):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, f"{module.__name__}: {result.failed} docstring examples failed"
        assert result.attempted > 0


def test_help_documents_the_arguments():
    import pydoc

    text = pydoc.render_doc(knng.graph)
    for word in ("Parameters", "include_self", "Returns", "int64", "float32", "Raises", "backend"):
        assert word in text
