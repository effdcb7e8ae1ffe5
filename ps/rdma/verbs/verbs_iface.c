/* RDMA-capable network interfaces from sysfs (see verbs_iface.h). */
#include "ps/rdma/verbs/verbs_iface.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/device_probe.h"

#define MAX_FOUND 128
#define PATH_CAP 1024

/* dir "/" name [suffix] into buf; 0, or -1 when it does not fit. */
static int join(char *buf, const char *dir, const char *name, const char *suffix)
{
    int n = snprintf(buf, PATH_CAP, "%s/%s%s", dir, name, suffix != NULL ? suffix : "");
    return n > 0 && n < PATH_CAP ? 0 : -1;
}

typedef struct {
    ps__vb_rdma_netdev_t items[MAX_FOUND];
    size_t n;
} found_t;

/* Reads the first line of a small file, without its newline. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *r = fgets(buf, (int)cap, f);
    fclose(f);
    if (r == NULL)
        return -1;
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    return 0;
}

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= IF_NAMESIZE || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    return strchr(name, '/') == NULL;
}

static void add(found_t *f, const char *ibdev, const char *netdev, int active)
{
    size_t ib_len = strlen(ibdev), net_len = strlen(netdev);
    /* (A device name too long for the table is no device ps can use.) */
    if (!valid_name(netdev) || ib_len >= PS__VB_IBDEV_NAME_MAX)
        return;
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->items[i].netdev, netdev) == 0) {
            /* Seen through another path or device: active wins. */
            f->items[i].active |= active;
            return;
        }
    }
    if (f->n == MAX_FOUND)
        return;
    ps__vb_rdma_netdev_t *it = &f->items[f->n++];
    memset(it, 0, sizeof(*it));
    memcpy(it->ibdev, ibdev, ib_len + 1);
    memcpy(it->netdev, netdev, net_len + 1);
    it->active = active;
}

/* 1 if any port of the device reports ACTIVE ("4: ACTIVE"). */
static int device_active(const char *devdir)
{
    char path[PATH_CAP];
    if (join(path, devdir, "ports", NULL) != 0)
        return 0;
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int active = 0;
    struct dirent *e;
    while (!active && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char file[PATH_CAP], line[64];
        if (join(file, path, e->d_name, "/state") == 0 &&
            read_line(file, line, sizeof(line)) == 0 && strstr(line, "ACTIVE") != NULL)
            active = 1;
    }
    closedir(d);
    return active;
}

/* The netdevs named by the files in ports/<p>/gid_attrs/ndevs/. */
static void scan_gid_ndevs(found_t *f, const char *ibdev, const char *devdir, int active)
{
    char ports[PATH_CAP];
    if (join(ports, devdir, "ports", NULL) != 0)
        return;
    DIR *pd = opendir(ports);
    if (pd == NULL)
        return;
    struct dirent *pe;
    while ((pe = readdir(pd)) != NULL) {
        if (pe->d_name[0] == '.')
            continue;
        char ndevs[PATH_CAP];
        if (join(ndevs, ports, pe->d_name, "/gid_attrs/ndevs") != 0)
            continue;
        DIR *nd = opendir(ndevs);
        if (nd == NULL)
            continue;
        struct dirent *ne;
        while ((ne = readdir(nd)) != NULL) {
            if (ne->d_name[0] == '.')
                continue;
            char file[PATH_CAP], name[64];
            if (join(file, ndevs, ne->d_name, NULL) == 0 &&
                read_line(file, name, sizeof(name)) == 0)
                add(f, ibdev, name, active);
        }
        closedir(nd);
    }
    closedir(pd);
}

static int cmp_netdev(const void *a, const void *b)
{
    const ps__vb_rdma_netdev_t *x = a, *y = b;
    if (x->active != y->active)
        return y->active - x->active;
    int c = strcmp(x->ibdev, y->ibdev);
    return c != 0 ? c : strcmp(x->netdev, y->netdev);
}

ps_status_t ps__vb_rdma_netdevs(const char *sysfs_root, ps__vb_rdma_netdev_t *out, size_t cap,
                                size_t *n_p)
{
    if (sysfs_root == NULL || n_p == NULL || (out == NULL && cap != 0))
        return PS_ERR_INVALID_ARG;
    found_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return PS_ERR_NO_MEMORY;
    char classdir[PATH_CAP];
    DIR *d = join(classdir, sysfs_root, "class/infiniband", NULL) == 0 ? opendir(classdir) : NULL;
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char devdir[PATH_CAP];
            if (join(devdir, classdir, e->d_name, NULL) != 0)
                continue;
            int active = device_active(devdir);

            char netdir[PATH_CAP];
            DIR *nd = join(netdir, devdir, "device/net", NULL) == 0 ? opendir(netdir) : NULL;
            if (nd != NULL) {
                struct dirent *ne;
                while ((ne = readdir(nd)) != NULL) {
                    if (ne->d_name[0] != '.')
                        add(f, e->d_name, ne->d_name, active);
                }
                closedir(nd);
            }
            char parent[PATH_CAP], name[64];
            if (join(parent, devdir, "parent", NULL) == 0 &&
                read_line(parent, name, sizeof(name)) == 0)
                add(f, e->d_name, name, active);
            scan_gid_ndevs(f, e->d_name, devdir, active);
        }
        closedir(d);
    }
    qsort(f->items, f->n, sizeof(f->items[0]), cmp_netdev);
    size_t n = f->n < cap ? f->n : cap;
    if (n > 0)
        memcpy(out, f->items, n * sizeof(*out));
    *n_p = n;
    free(f);
    return PS_OK;
}

static int is_nvidia_gpu(const char *devdir)
{
    char path[PATH_CAP], vendor[32], klass[32];
    if (join(path, devdir, "vendor", NULL) != 0 || read_line(path, vendor, sizeof(vendor)) != 0 ||
        strcmp(vendor, "0x10de") != 0)
        return 0;
    if (join(path, devdir, "class", NULL) != 0 || read_line(path, klass, sizeof(klass)) != 0)
        return 0;
    /* VGA (0x0300xx) or 3D (0x0302xx) controller; not the audio function. */
    return strncmp(klass, "0x0300", 6) == 0 || strncmp(klass, "0x0302", 6) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

#define NO_SUCH_GPU 1000000

/* The physical index `visible` maps `index` to, as CUDA reads the list (an
 * entry that is not a device ends it); -1 when the GPU is named by UUID or
 * MIG instance, which sysfs does not show. */
static int visible_index(const char *visible, int index)
{
    if (visible == NULL || *visible == '\0')
        return index;
    const char *p = visible;
    for (int i = 0;; i++) {
        if (strncmp(p, "GPU-", 4) == 0 || strncmp(p, "MIG-", 4) == 0)
            return -1;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= NO_SUCH_GPU || (*end != ',' && *end != '\0'))
            return NO_SUCH_GPU;
        if (i == index)
            return (int)v;
        if (*end == '\0')
            return NO_SUCH_GPU;
        p = end + 1;
    }
}

/* The real path of PCI device `name` ("0000:3b:00.0") under the sysfs root. */
static ps_status_t pci_device_path(const char *sysfs_root, const char *name, char *path,
                                   size_t cap)
{
    char link[PATH_CAP], real[PATH_MAX];
    if (join(link, sysfs_root, "bus/pci/devices/", name) != 0 || realpath(link, real) == NULL)
        return PS_ERR_NOT_FOUND;
    if (strlen(real) >= cap)
        return PS_ERR_TOO_LARGE;
    snprintf(path, cap, "%s", real);
    return PS_OK;
}

ps_status_t ps__vb_gpu_pci_path(const char *sysfs_root, int index, const char *visible,
                                char *path, size_t cap)
{
    if (sysfs_root == NULL || path == NULL || cap == 0 || index < 0)
        return PS_ERR_INVALID_ARG;
    int phys = visible_index(visible, index);
    if (phys < 0)
        return PS_ERR_UNSUPPORTED;
    char dir[PATH_CAP];
    DIR *d = join(dir, sysfs_root, "bus/pci/devices", NULL) == 0 ? opendir(dir) : NULL;
    if (d == NULL)
        return PS_ERR_NOT_FOUND;
    char(*gpus)[64] = calloc(64, sizeof(*gpus)); /* PCI addresses */
    if (gpus == NULL) {
        closedir(d);
        return PS_ERR_NO_MEMORY;
    }
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 64) {
        char devdir[PATH_CAP];
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(gpus[0]) ||
            join(devdir, dir, e->d_name, NULL) != 0 || !is_nvidia_gpu(devdir))
            continue;
        memcpy(gpus[n++], e->d_name, strlen(e->d_name) + 1); /* length checked above */
    }
    closedir(d);
    qsort(gpus, n, sizeof(gpus[0]), cmp_str);
    ps_status_t st =
        (size_t)phys < n ? pci_device_path(sysfs_root, gpus[phys], path, cap) : PS_ERR_NOT_FOUND;
    free(gpus);
    return st;
}

ps_status_t ps__vb_pci_path_of_bus_id(const char *sysfs_root, const char *bus_id, char *path,
                                      size_t cap)
{
    if (sysfs_root == NULL || bus_id == NULL || path == NULL || cap == 0)
        return PS_ERR_INVALID_ARG;
    unsigned domain, bus, dev, fn;
    char tail;
    /* Hex digits and separators only: sscanf's %x would take "0x" too. */
    if (bus_id[strspn(bus_id, "0123456789abcdefABCDEF:.")] != '\0' ||
        sscanf(bus_id, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4 ||
        domain > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
        return PS_ERR_INVALID_ARG;
    char name[16];
    snprintf(name, sizeof(name), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    return pci_device_path(sysfs_root, name, path, cap);
}

ps_status_t ps__vb_gpu_near(const char *sysfs_root, int gpu, const char *visible, char *path,
                            size_t cap, char *how, size_t how_cap)
{
    if (sysfs_root == NULL || path == NULL || cap == 0)
        return PS_ERR_INVALID_ARG;
    int device = gpu;
    if (device < 0 && ps_device_probe_in_use(PS_MEM_CUDA, &device) != PS_OK)
        device = 0;
    char bus_id[32];
    if (ps_device_probe_pci_bus_id(PS_MEM_CUDA, device, bus_id, sizeof(bus_id)) == PS_OK) {
        if (how != NULL && how_cap > 0)
            snprintf(how, how_cap, "CUDA device %d, %s", device, bus_id);
        return ps__vb_pci_path_of_bus_id(sysfs_root, bus_id, path, cap);
    }
    if (how != NULL && how_cap > 0)
        snprintf(how, how_cap, "GPU %d in PCI order", device);
    return ps__vb_gpu_pci_path(sysfs_root, device, visible, path, cap);
}

int ps__vb_pci_closeness(const char *sysfs_root, const char *ibdev, const char *near)
{
    char link[PATH_CAP], real[PATH_MAX];
    if (sysfs_root == NULL || ibdev == NULL || near == NULL ||
        snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", sysfs_root, ibdev) >=
            (int)sizeof(link) ||
        realpath(link, real) == NULL)
        return 0;
    int shared = 0;
    const char *a = real, *b = near;
    for (;;) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        if (la != lb || strncmp(a, b, la) != 0)
            break;
        shared += la > 0;
        if (a[la] == '\0' || b[lb] == '\0')
            break;
        a += la + 1;
        b += lb + 1;
    }
    return shared;
}

ps_status_t ps__vb_pick_interface(const char *sysfs_root, const char *near,
                                  ps__vb_has_addr_func_t has_addr, void *arg, char *ifname,
                                  size_t cap, char *why, size_t why_cap)
{
    if (sysfs_root == NULL || has_addr == NULL || ifname == NULL || cap == 0)
        return PS_ERR_INVALID_ARG;
    ps__vb_rdma_netdev_t list[16];
    size_t n = 0;
    ps_status_t st = ps__vb_rdma_netdevs(sysfs_root, list, 16, &n);
    if (st != PS_OK)
        return st;
    int best = -1, best_close = -1;
    for (size_t i = 0; i < n; i++) {
        if (!has_addr(arg, list[i].netdev))
            continue;
        int close = near != NULL ? ps__vb_pci_closeness(sysfs_root, list[i].ibdev, near) : 0;
        if (close > best_close) {
            best = (int)i;
            best_close = close;
        }
    }
    if (best >= 0) {
        if (strlen(list[best].netdev) >= cap)
            return PS_ERR_TOO_LARGE;
        snprintf(ifname, cap, "%s", list[best].netdev);
        return PS_OK;
    }
    if (why != NULL && why_cap > 0) {
        if (n == 0) {
            snprintf(why, why_cap,
                     "no network interface has an RDMA device (nothing under %s/class/infiniband)",
                     sysfs_root);
        } else {
            size_t pos = (size_t)snprintf(why, why_cap, "the RDMA network interfaces (");
            for (size_t i = 0; i < n && pos < why_cap; i++) {
                int w = snprintf(why + pos, why_cap - pos, "%s%s on %s", i ? ", " : "",
                                 list[i].netdev, list[i].ibdev);
                if (w < 0)
                    break;
                pos += (size_t)w;
            }
            if (pos < why_cap)
                snprintf(why + pos, why_cap - pos, ") have no IP address");
        }
    }
    return PS_ERR_NOT_FOUND;
}
