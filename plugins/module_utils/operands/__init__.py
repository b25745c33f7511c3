# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operands of the stack: applying their objects (apply, module operand), waiting until they are ready (wait,
modules operand and operand_status), the readiness checks of each kind (checks, pure), the diagnosis of a wait that did
not succeed (diagnosis, pure), the one waiter that reads the cluster and sleeps (waiter), and which nodes a
validation check runs on (validation, filter validation_plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
