import pytest


@pytest.fixture(scope="session")
def catalog():
    from entrypoint.core.data.recipe import load_catalog

    return load_catalog()
