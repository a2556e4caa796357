# Fits the float32 polynomial coefficients used by the vectorised tanh and erf in
# src/ops/kernels/vec.h (SLEEF's u10 erf/tanh were 6x/4x slower than its exp on this CPU), and
# reports their worst error in ULPs over a dense grid, emulating float32 Horner evaluation.
#   pip install numpy mpmath && python3 tools/mathfit/fit_float_erf_tanh.py
# Least squares on Chebyshev nodes; relative error weighting where the function is small.
import numpy as np, mpmath as mp
mp.mp.dps = 40
def cheb_nodes(a,b,n):
    k=np.arange(n); return (a+b)/2+(b-a)/2*np.cos((2*k+1)*np.pi/(2*n))
def fit(xs, target, basis, weights):
    A=np.array([[b(x)*w for b in basis] for x,w in zip(xs,weights)],dtype=np.float64)
    y=np.array([t*w for t,w in zip(target,weights)],dtype=np.float64)
    c,*_=np.linalg.lstsq(A,y,rcond=None); return c
def f32(v): return np.float32(v)
def horner32(c, z):
    r=np.float32(c[-1])
    for k in c[-2::-1]: r=np.float32(np.float32(r*z)+np.float32(k))
    return r
# ---- tanh small: tanh(x) = x + x^3 * P(x^2), |x| < 0.625
T0=0.625
xs=cheb_nodes(1e-4,T0,400)
tgt=[float((mp.tanh(x)-x)/x**3) for x in xs]
deg=5
c=fit(xs,tgt,[lambda x,k=k: x**(2*k) for k in range(deg)],[1.0]*len(xs))
print("tanh P:", [float(f32(v)) for v in c])
err=0
for x in np.linspace(1e-6,T0,20001):
    x32=f32(x); z=f32(x32*x32); r=f32(x32+f32(f32(x32*z)*horner32([f32(v) for v in c],z)))
    e=abs(float(r)-float(mp.tanh(float(x32))))/float(np.spacing(np.float32(mp.tanh(float(x32)))))
    err=max(err,e)
print("tanh small max ulp", err)
# ---- erf: |x| in 8 intervals of width 0.5 on [0, 4), a degree-7 polynomial in the offset u
# into the interval (vec.h picks each lane's coefficients from 8-entry tables). Interval 0 is
# erf(u) = u * Q(u) (no constant term: accurate for tiny x); the others fit erf(x0 + u).
W, N, DEG = 0.5, 8, 7
def fma32(a, b, c): return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
def erf_interval(i):
    us = cheb_nodes(0, W, 300)
    if i == 0:
        tgt = [float(mp.erf(u) / u) for u in us]
        q = fit(us, tgt, [lambda u, k=k: u**k for k in range(DEG)], [1.0 / t for t in tgt])
        return [0.0] + list(q)
    tgt = [float(mp.erf(i * W + u)) for u in us]
    return list(fit(us, tgt, [lambda u, k=k: u**k for k in range(DEG + 1)], [1.0] * len(us)))
kC = [[f32(v) for v in erf_interval(i)] for i in range(N)]
def erf32(x):
    a = abs(f32(x))
    if a >= 4: return f32(1.0)
    i = min(N - 1, int(f32(a + a)))
    u = f32(a - f32(i * W))
    r = kC[i][-1]
    for k in kC[i][-2::-1]: r = fma32(r, u, k)
    return r
print("erf kC[k][interval]:")
for k in range(DEG + 1):
    print("  {" + ", ".join("%.9ef" % float(kC[i][k]) for i in range(N)) + "},")
err = 0; worst = None
for x in np.concatenate([np.linspace(1e-6, 4.2, 200001), np.geomspace(1e-30, 1e-3, 2001)]):
    x32 = f32(x); ref = mp.erf(float(x32))
    e = abs(float(erf32(x32)) - float(ref)) / float(np.spacing(np.float32(ref)))
    if e > err: err = e; worst = float(x32)
print("erf max ulp", err, worst)
