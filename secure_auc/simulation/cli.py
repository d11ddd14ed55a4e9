"""``secure-auc simulate`` (placeholder until the simulator lands)."""


def add_parser(sub) -> None:
    return None
