import pytest


@pytest.fixture(scope="session")
def catalog():
    from entrypoint.core.recipe import load_catalog

    return load_catalog()
