#pragma once
#include <microhttpd.h>
