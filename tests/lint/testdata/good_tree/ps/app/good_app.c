/* Fixture for the layering lint test: only public headers. */
#include "ps/base/status.h"
#include "ps/net/postoffice.h"
#include "ps/net/codec/message.h"
#include "ps/gpu/mem.h"
