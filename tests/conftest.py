import os

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("TQDM_DISABLE", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "site: checks of the built website (_build/html); run after `make book`")
