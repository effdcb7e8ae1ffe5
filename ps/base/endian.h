/*
 * Little-endian loads and stores for wire formats. Every ps wire format
 * fixes its byte order (little-endian) whatever the host's; these assemble
 * values byte by byte, so they need no alignment either, and compilers turn
 * them into single moves on little-endian hosts.
 */
#ifndef PS_BASE_ENDIAN_H_
#define PS_BASE_ENDIAN_H_

#include <stdint.h>

static inline void ps_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void ps_put_le32(uint8_t *p, uint32_t v)
{
    ps_put_le16(p, (uint16_t)v);
    ps_put_le16(p + 2, (uint16_t)(v >> 16));
}

static inline void ps_put_le64(uint8_t *p, uint64_t v)
{
    ps_put_le32(p, (uint32_t)v);
    ps_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t ps_get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t ps_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t ps_get_le64(const uint8_t *p)
{
    return (uint64_t)ps_get_le32(p) | ((uint64_t)ps_get_le32(p + 4) << 32);
}

#endif /* PS_BASE_ENDIAN_H_ */
