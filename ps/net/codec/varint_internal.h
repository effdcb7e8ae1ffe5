/*
 * Inside the codec: the LEB128 varints of the compact frame header
 * (frame.h) and the compact meta (meta_fast.h). Seven bits a byte, low
 * group first, the top bit set on every byte but the last. Only the
 * shortest encoding of a value is accepted (a last byte of 0 after the
 * first is refused), so that every value has exactly one form on the wire
 * and a decoded frame re-encodes to its bytes.
 */
#ifndef PS_NET_CODEC_VARINT_INTERNAL_H_
#define PS_NET_CODEC_VARINT_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The longest varint, a u64. */
#define PS__VARINT_MAX_LEN 10

/* Bytes the varint of v takes (1..10). */
static inline size_t ps__varint_len(uint64_t v)
{
    return (size_t)(64 - __builtin_clzll(v | 1) + 6) / 7;
}

/* Writes the varint of v at p; returns the byte after it. */
static inline uint8_t *ps__varint_put(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* ps__varint_put() with the usual 1- and 2-byte values inline, and
 * values below 2^56 in one 8-byte store: p must have 8 bytes of room
 * (bytes past the varint are left undefined). */
static inline uint8_t *ps__varint_put_fast(uint8_t *p, uint64_t v)
{
    if (v < 0x80) {
        *p = (uint8_t)v;
        return p + 1;
    }
    if (v < 0x4000) {
        p[0] = (uint8_t)(v | 0x80);
        p[1] = (uint8_t)(v >> 7);
        return p + 2;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (v < (1ull << 56)) {
        /* The 7-bit groups spread to a byte each (the packing of
         * ps__varint_get_long() in reverse), then the top bits of all but
         * the last byte set. */
        uint64_t x = (v & 0x000000000fffffffull) | ((v & 0x00fffffff0000000ull) << 4);
        x = (x & 0x00003fff00003fffull) | ((x & 0x0fffc0000fffc000ull) << 2);
        x = (x & 0x007f007f007f007full) | ((x & 0x3f803f803f803f80ull) << 1);
        size_t n = ps__varint_len(v);
        x |= 0x8080808080808080ull >> (8 * (9 - n));
        memcpy(p, &x, sizeof(x));
        return p + n;
    }
#endif
    return ps__varint_put(p, v);
}

/* The multi-byte case of ps__varint_get(). */
__attribute__((noinline, unused)) static int ps__varint_get_long(const uint8_t *p, size_t avail,
                                                        uint64_t *v_p)
{
    uint64_t v = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (avail >= 8) {
        /* Up to 8 bytes at once: the first byte without its top bit ends
         * it; the 7-bit groups are then packed in three steps. */
        uint64_t w;
        memcpy(&w, p, sizeof(w));
        uint64_t stops = ~w & 0x8080808080808080ull;
        if (stops != 0) {
            unsigned n = (unsigned)__builtin_ctzll(stops) / 8 + 1;
            if (n > 1 && p[n - 1] == 0) {
                return -1; /* overlong */
            }
            uint64_t x = w & (0x7f7f7f7f7f7f7f7full >> (64 - 8 * n));
            x = (x & 0x007f007f007f007full) | ((x & 0x7f007f007f007f00ull) >> 1);
            x = (x & 0x00003fff00003fffull) | ((x & 0x3fff00003fff0000ull) >> 2);
            x = (x & 0x000000000fffffffull) | ((x & 0x0fffffff00000000ull) >> 4);
            *v_p = x;
            return (int)n;
        }
    }
#endif
    for (unsigned i = 0; i < PS__VARINT_MAX_LEN; i++) {
        if (i >= avail) {
            return 0;
        }
        uint8_t b = p[i];
        if (i == PS__VARINT_MAX_LEN - 1 && b > 1) {
            return -1; /* past 64 bits */
        }
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            if (b == 0 && i > 0) {
                return -1; /* overlong */
            }
            *v_p = v;
            return (int)i + 1;
        }
    }
    return -1;
}

/* Reads the varint at p[0..avail). Returns its length (*v_p set); 0 when
 * avail ends inside it and every byte so far is valid; -1 when it is not
 * the shortest form of its value or passes 64 bits. */
static inline int ps__varint_get(const uint8_t *p, size_t avail, uint64_t *v_p)
{
    if (avail != 0 && p[0] < 0x80) {
        *v_p = p[0];
        return 1;
    }
    if (avail >= 2 && p[1] < 0x80 && p[1] != 0) {
        *v_p = (p[0] & 0x7fu) | ((uint32_t)p[1] << 7);
        return 2;
    }
    return ps__varint_get_long(p, avail, v_p);
}

/* Zigzag: small negative and positive i32 both to small u32. */
static inline uint32_t ps__zigzag32(int32_t v)
{
    return ((uint32_t)v << 1) ^ (0u - ((uint32_t)v >> 31));
}

static inline int32_t ps__unzigzag32(uint32_t u)
{
    return (int32_t)((u >> 1) ^ (0u - (u & 1u)));
}

static inline uint64_t ps__zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (0u - ((uint64_t)v >> 63));
}

static inline int64_t ps__unzigzag64(uint64_t u)
{
    return (int64_t)((u >> 1) ^ (0u - (u & 1u)));
}

#endif /* PS_NET_CODEC_VARINT_INTERNAL_H_ */
