import torch, time
torch.set_num_threads(1)
torch.manual_seed(0)
x = torch.randn(8, 9504, 64)
xb = x.bfloat16()
# reference: fp32 silu rounded once (what ops::bf16_silu computes)
ref = torch.nn.functional.silu(xb.float()).bfloat16()
nat = torch.nn.functional.silu(xb)
print("forward bitwise equal:", torch.equal(ref, nat), "max diff", (ref.float()-nat.float()).abs().max().item())
g = torch.randn_like(x).bfloat16()
a = xb.clone().requires_grad_(); torch.nn.functional.silu(a).backward(g)
b = xb.float().requires_grad_(); (torch.nn.functional.silu(b)).backward(g.float())
print("backward: native bf16 vs fp32-rounded-once max diff", (a.grad.float()-b.grad.bfloat16().float()).abs().max().item(),
      "equal", torch.equal(a.grad, b.grad.bfloat16()))
def t(fn, n=30):
    fn(); s=time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter()-s)/n*1e3
def nat_fb():
    a = xb.clone().requires_grad_(); torch.nn.functional.silu(a).backward(g)
def up_fb():
    a = xb.clone().requires_grad_(); torch.nn.functional.silu(a.float()).bfloat16().backward(g)
for r in range(3):
    print("ms fwd+bwd native bf16 %.2f  upcast %.2f" % (t(nat_fb), t(up_fb)))
