"""The downstream optimizer: it materializes skills on new code under the validator's gates.

``optimize(load_problem(kernel, workload), make_planner("klineage", kb), validator)`` returns an
``AgentReport``. The baselines (``memory``, ``none``) run in the same loop with the same materializer,
gates and budget.
"""

from klineage.agent.loop import optimize
from klineage.agent.planners import METHODS, make_planner
from klineage.agent.problem import Problem, ProblemError, load_problem
from klineage.agent.report import AgentReport, Measurement

__all__ = ["METHODS", "AgentReport", "Measurement", "Problem", "ProblemError", "load_problem", "make_planner",
           "optimize"]
