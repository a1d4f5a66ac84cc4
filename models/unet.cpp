#include "models/unet.h"
