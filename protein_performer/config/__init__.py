"""Run settings: the dataclass schema (:mod:`.schema`), its checks (:mod:`.validate`) and the
per-command help text (:mod:`.help`)."""
