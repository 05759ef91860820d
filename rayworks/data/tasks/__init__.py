"""Synthetic reasoning tasks with exact verifiers, registered by name."""

from rayworks.data.tasks.arithmetic import ArithmeticTask
from rayworks.data.tasks.base import TASKS, Example, Task, get_task, register_task

__all__ = ["TASKS", "ArithmeticTask", "Example", "Task", "get_task", "register_task"]
