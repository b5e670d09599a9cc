"""Run configuration: everything that decides what a run does (stored with the run, reused on resume)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class RunConfig(BaseModel):
    task: str
    budget: int = Field(24, ge=1, description="hardware measurements the run may spend")
    router: Literal["selective", "topk", "measure-all"] = "selective"
    threshold: float = Field(0.6, ge=0.0, le=1.0, description="confidence needed to trust a forecast")
    measure_per_round: int = Field(4, ge=1, description="k: at most this many measurements per expansion")
    children_per_round: int | None = Field(None, ge=1, description="N: children proposed per expansion")
    generator: str = "offline"
    forecaster: str = "learned"
    model: str | None = None
    device: str | None = None
    parallel: int = Field(1, ge=0, description="measurements in flight at once (a pool, or Ray actors)")
    ray: str | None = Field(None, description="'auto' or a Ray cluster address: measure on Ray actors")
    replay: str | None = Field(None, description="a store to replay measurements from instead of measuring "
                               "(simulated searches, as Kernel Tuner's simulation mode)")
    share_device: bool = Field(False, description="let several parallel workers share one device (they then "
                               "share its compute units)")
    seed: int = 0
    sizes: Literal["full", "small"] = "full"
    max_rounds: int | None = Field(None, description="expansions before stopping (default 4 x budget)")
    max_device_seconds: float | None = Field(None, description="optional wall-clock budget of measurements")
    reserve_fraction: float | None = Field(None, ge=0.0, le=0.9, description="budget kept to verify accepted nodes")
    confirm_top: int = Field(3, ge=0, description="best candidates re-measured (confirmed) before reporting")
    puct_c: float = 1.0
    training_db: str | None = Field(None, description="store the learned forecaster trains on (default: the run's)")
    leave_task_out: bool = Field(False, description="train the learned forecaster without this task's data")
    learn_online: bool = Field(True, description="retrain the forecaster on the run's own measurements as they arrive")
    risk: float = Field(0.1, gt=0.0, lt=1.0, description="selective: tolerated share of false prunes (and false "
                        "accepts) among trusted decisions, certified at 90 % confidence from calibration data")
    audit_share: float = Field(0.1, ge=0.0, le=0.5, description="selective: share of the budget that may measure "
                               "a random sample of trusted decisions")

    @property
    def n_children(self) -> int:
        """Children per expansion: measure-all k (all measured), topk 4k (the paper's 16 forecast / 4 measured),
        selective 8k (forecasts are cheap; uncertain ones compete for the k measurements)."""
        if self.children_per_round:
            return self.children_per_round
        factor = {"measure-all": 1, "topk": 4}.get(self.router, 8)
        return factor * self.measure_per_round

    @property
    def rounds_limit(self) -> int:
        return self.max_rounds or 4 * self.budget

    @property
    def reserve(self) -> int:
        fraction = self.reserve_fraction if self.reserve_fraction is not None else (
            0.25 if self.router == "selective" else 0.0)
        return int(round(fraction * self.budget))
