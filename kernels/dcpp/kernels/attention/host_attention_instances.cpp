// The host launcher's attention steps (dcpp::host_attention) for every input type, compiled
// once: programs that define DCPP_HOST_ATTENTION_PRECOMPILED link this translation unit instead
// of compiling the kernel bodies for the host in each of their own (Meson:
// `dcpp_host_attention_dep`).
#include "dcpp/attention/ring.hpp"

namespace dcpp {

template void host_attention::forward_step<float>(const attention_step<float>&) const;
template void host_attention::forward_step<half>(const attention_step<half>&) const;
template void host_attention::forward_step<bfloat16>(const attention_step<bfloat16>&) const;
template void host_attention::backward_step<float>(const attention_step<float>&) const;
template void host_attention::backward_step<half>(const attention_step<half>&) const;
template void host_attention::backward_step<bfloat16>(const attention_step<bfloat16>&) const;

} // namespace dcpp
