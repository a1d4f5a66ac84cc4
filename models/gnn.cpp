#include "models/gnn.h"
