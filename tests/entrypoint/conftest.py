import pytest


@pytest.fixture(scope="session")
def catalog():
    from entrypoint.recipe import load_catalog

    return load_catalog()
