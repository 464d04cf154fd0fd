"""One real single-node Ray for the whole test session (``local_mode`` no longer exists).

Started once, on first use, and shut down at the end: a Ray start costs seconds, so every
test here shares it (the pipeline reuses a running Ray and never shuts down one it did not
start). Without the extra, every test here skips with one line saying how to install it.
"""

from __future__ import annotations

import pytest

INSTALL_HINT = "Ray is not installed: pip install 'mellea-local[ray]' (make dev does)"


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason=INSTALL_HINT)
    pytest.importorskip("ray.data", reason=INSTALL_HINT)
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 * 2**20,
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
