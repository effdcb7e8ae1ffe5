/*
 * The variables of the tcp van, an X-macro list in the core table's format
 * (ps/base/config_vars.h): registered as a table of their own
 * (ps_config_register), listed by ps_info and the README with the rest.
 * No include guard: included with different definitions of PS_CONFIG_VAR.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including this list"
#endif

PS_CONFIG_VAR(PS_TCP_CONNS_PER_PEER, INT, "1", "tcp", NULL,
              "Number of TCP connections opened to each peer, a count.")
PS_CONFIG_VAR(PS_TCP_ALIGN_COPY, STRING, "auto", "tcp", NULL,
              "Send a segment of 1 MiB or more that does not start on a page from a page-aligned copy: "
              "on, off, or auto (measure both ways while sending and keep the cheaper).")
PS_CONFIG_VAR(PS_TCP_SOCKBUF, SIZE, "0", "tcp", NULL,
              "Socket send and receive buffer size, in bytes; 0 keeps the kernel default.")
