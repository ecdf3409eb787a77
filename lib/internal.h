/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * For tests outside lib/ that reach below the public header (an endpoint
 * built by hand): the device layer's header.  Nothing in lib/ includes
 * this file; each folder of lib/ has its own header (see
 * Documentation/design.rst, "The library's layers").  Not installed.
 */
#ifndef TPU_INTERNAL_H
#define TPU_INTERNAL_H

#include "dev/dev.h"

#endif /* TPU_INTERNAL_H */
