"""Run configuration: everything that decides what a run does (stored with the run, reused on resume).

Router, generator and forecaster names are checked against their registries
(:mod:`kernelcast.graphs.route.routers`, :mod:`kernelcast.agents.registry`), and what follows from the router
(children per expansion, the verification reserve) is read from its registered settings. The field defaults
here are the defaults of every front door: they read them with :func:`default`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, model_validator

from kernelcast.agents.forecast.local import model_identity
from kernelcast.agents.registry import DEFAULT_FORECASTER, DEFAULT_GENERATOR, AnyGeneratorName, ForecasterName
from kernelcast.graphs.route.routers import DEFAULT_RISK, DEFAULT_ROUTER, RouterName, RouterSpec, router_spec
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.records import RunRecord


class RunConfig(BaseModel):
    task: str
    budget: int = Field(24, ge=1, description="hardware measurements the run may spend")
    router: RouterName = DEFAULT_ROUTER
    measure_per_round: int = Field(4, ge=1, description="k: at most this many measurements per expansion")
    children_per_round: int | None = Field(None, ge=1, description="N: children proposed per expansion")
    generator: AnyGeneratorName = DEFAULT_GENERATOR
    forecaster: ForecasterName = DEFAULT_FORECASTER
    model: str | None = None
    model_weights: str | None = Field(None, description="a local model's weights digest, taken when the run was "
                                      "configured: its trust is keyed by it, not by the model's path")
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
    confirm_top: int = Field(3, ge=0, description="best candidates re-measured (confirmed) before reporting; 0: no "
                             "confirmations at all, so no forecast is trusted against a measured incumbent")
    puct_c: float = 1.0
    training_db: str | None = Field(None, description="store the learned forecaster trains on (default: the run's)")
    leave_task_out: bool = Field(False, description="train the learned forecaster without this task's data")
    learn_online: bool = Field(True, description="retrain the forecaster on the run's own measurements as they arrive")
    risk: float = Field(DEFAULT_RISK, gt=0.0, lt=1.0, description="selective: tolerated share of false prunes (and false "
                        "accepts) among trusted decisions, certified at 90 % confidence from calibration data")
    trust_seed_replay: bool = Field(True, description="selective: until the device has its own calibration rows, "
                                    "certify trust on the shipped seed's replayed decisions, each side trusted on a "
                                    "task only once its first 2 audits there were right, and withdrawn when the "
                                    "device's own record refutes it (off: nothing is trusted before the device's own "
                                    "rows certify a stage, which took 4-6 runs in router_bench)")
    trust_task_rows: bool = Field(True, description="selective: certify on the run's own task's calibration rows "
                                  "when they are enough alone; off: on every task's, pooled and per task (what a "
                                  "task the rows do not know gets)")
    audit_share: float = Field(0.1, ge=0.0, le=0.5, description="selective: share of the budget that may measure "
                               "a random sample of trusted decisions (and the trials of replayed thresholds)")
    follow_skill: bool = Field(False, description="selective: order each round by the forecasts' ranking (as topk) "
                               "where they claim or have shown rank skill, family coverage first where they have not "
                               "(the run summary says which and why); a template task also gets the forecaster's "
                               "best-ranked unmeasured points proposed where the forecaster can rank what it knows "
                               "(off: today's order, coverage then Thompson draws)")

    @model_validator(mode="after")
    def _pin_weights(self, info: ValidationInfo) -> RunConfig:
        """A new config of a ``local:`` model records its weights' digest; a stored one keeps what it recorded
        (a run from before digests were recorded keeps none: its rows certify no model by digest)."""
        if self.model_weights is None and not (info.context or {}).get("stored"):
            self.model_weights = model_identity(self.model)
        return self

    @classmethod
    def of_run(cls, run: RunRecord) -> RunConfig:
        """The configuration a stored run was started with (fields added since read with their defaults)."""
        return cls.model_validate(run.config, context={"stored": True})

    def for_task(self, task: Task, name: str) -> RunConfig:
        """The config as stored with a run of ``task`` (``name``: the built-in's name or the task file's path):
        sizes under the label of the problem they measure (:meth:`Task.size_label`)."""
        return self.model_copy(update={"task": name, "sizes": task.size_label(self.sizes)})

    @property
    def router_spec(self) -> RouterSpec:
        return router_spec(self.router)

    @property
    def n_children(self) -> int:
        """Children per expansion: k times the router's children per measurement (measure-all 1, topk 4 as
        the paper's 16 forecast / 4 measured, selective 8: forecasts are cheap, uncertain ones compete)."""
        return self._per_round(self.router_spec.children_per_measurement)

    @property
    def n_opening(self) -> int:
        """Children of an expansion of the reference, the opening design. Nothing is known of the task yet
        but the forecast, which is cheap next to a measurement: selective forecasts 32 design points per
        measurement there (128 at k = 4), and measures the few it ranks best. A 24-point design left the
        forecast nothing good to pick on gemv (the best of the top 4 at 58 % of the optimum, median of 5
        Sobol seeds; 95 % from 192 points; see docs/forecaster.md)."""
        return self._per_round(self.router_spec.opening_per_measurement)

    def _per_round(self, per_measurement: int) -> int:
        """Children of one expansion: ``children_per_round`` when set, else per measurement times k."""
        return self.children_per_round or per_measurement * self.measure_per_round

    @property
    def rounds_limit(self) -> int:
        return self.max_rounds or 4 * self.budget

    @property
    def reserve(self) -> int:
        fraction = self.reserve_fraction if self.reserve_fraction is not None else self.router_spec.reserve_share
        return int(round(fraction * self.budget))


def listed_router(run: RunRecord) -> str:
    """The router a stored run names, for listings: "?" when its config does not validate (a row written by
    an older kernelcast or by hand), so one odd row never stops a listing."""
    try:
        return RunConfig.of_run(run).router
    except ValidationError:
        return "?"


def default(field: str) -> Any:
    """A RunConfig field's default: what a front door (CLI option, tool parameter) offers when not told."""
    return RunConfig.model_fields[field].default
