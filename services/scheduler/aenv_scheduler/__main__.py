"""`python -m aenv_scheduler`: run the scheduler until SIGINT/SIGTERM."""

from __future__ import annotations

from aenv_common.service_main import Service, run_service
from aenv_scheduler.config import SchedulerSettings


def main() -> None:
    settings = SchedulerSettings()

    def build() -> Service:
        from aenv_scheduler.server import SchedulerServer

        return SchedulerServer(settings)

    run_service("scheduler", settings.common, build)


if __name__ == "__main__":
    main()
