import pytest

from tests.chart.helm import install


@pytest.fixture(scope="session")
def helm():
    """The real helm v4 binary (installed once, cached under .cache/helm)."""
    return install()
