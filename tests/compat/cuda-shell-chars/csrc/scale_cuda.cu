__global__ void scale_kernel(float* x) { x[threadIdx.x] *= 2.0f; }
