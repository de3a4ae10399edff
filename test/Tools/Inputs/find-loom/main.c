/* Opens the CPU backend of the installed libloomrt and runs one kernel. */
#include <loomrt/loomrt.h>
#include <stdio.h>

int main(void) {
  loomrt_device dev;
  loomrt_stream s;
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  void *dx, *dy;
  if (loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &dev) || loomrt_stream_create(dev, &s) ||
      loomrt_alloc(dev, LOOMRT_MEM_DEVICE, sizeof x, &dx) ||
      loomrt_alloc(dev, LOOMRT_MEM_DEVICE, sizeof y, &dy) ||
      loomrt_memcpy_async(s, dx, x, sizeof x) ||
      loomrt_lerp(s, LOOMRT_F32, dx, dx, dy, 4, 0.5) ||
      loomrt_memcpy_async(s, y, dy, sizeof y) || loomrt_stream_synchronize(s)) {
    fprintf(stderr, "error: %s\n", loomrt_last_error());
    return 1;
  }
  printf("libloomrt on %s: lerp(x, x, 0.5) = %g %g %g %g\n", loomrt_backend_name(LOOMRT_BACKEND_CPU),
         y[0], y[1], y[2], y[3]);
  return 0;
}
