/* The version of ps. Bumped by hand at releases. */
#ifndef PS_VERSION_H_
#define PS_VERSION_H_

#define PS_VERSION_MAJOR 0
#define PS_VERSION_MINOR 1
#define PS_VERSION_PATCH 0
#define PS_VERSION_STRING "0.1.0"

#endif /* PS_VERSION_H_ */
