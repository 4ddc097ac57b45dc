"""How ``-A`` finds an app's jobs, for a package that contributes a loader (entry point
``ujobs_bridge.loaders``): the loaded app, and the helpers that import a target and index jobs.

What it is not: the entry-point discovery itself (the engine's, internal).
"""

from __future__ import annotations

from ujobs_bridge._internal.config.loading import (
    LoadedApp,
    RunningWorker,
    build,
    load_target,
    resolve,
)

__all__ = ["LoadedApp", "RunningWorker", "build", "load_target", "resolve"]
