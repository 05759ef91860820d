"""Synthetic reasoning tasks with exact verifiers, registered by name."""

from rayworks.data.tasks.arithmetic import ArithmeticMixTask, ArithmeticTask
from rayworks.data.tasks.bag import BagDrawCoTTask, BagDrawTask
from rayworks.data.tasks.bag_sum import BagSumCoTTask, BagSumTask
from rayworks.data.tasks.base import TASKS, Example, Task, get_task, register_task
from rayworks.data.tasks.countdown import CountdownTask
from rayworks.data.tasks.shapes import ShapesTask

__all__ = [
    "TASKS",
    "ArithmeticMixTask",
    "ArithmeticTask",
    "BagDrawCoTTask",
    "BagDrawTask",
    "BagSumCoTTask",
    "BagSumTask",
    "CountdownTask",
    "Example",
    "ShapesTask",
    "Task",
    "get_task",
    "register_task",
]
