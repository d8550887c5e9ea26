#pragma once
// The collectives' interface lives in core (core/communicator.h), so that the engine's
// context-parallel step (engine/context_rows.h) can use it below this layer; this header is
// where the rest of dist/ and the layers above have always found it.
#include "core/communicator.h"
