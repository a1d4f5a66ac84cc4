#include "models/vit.h"
