// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Unit tests: being written. */
#include "tap.h"

void test_pipe(void)
{
}
