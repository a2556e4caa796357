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
# ---- erf small: erf(x) = x * P(x^2), |x| < E0
E0=0.875
xs=cheb_nodes(1e-4,E0,400)
tgt=[float(mp.erf(x)/x) for x in xs]
deg=7
c=fit(xs,tgt,[lambda x,k=k: x**(2*k) for k in range(deg)],[1.0/float(mp.erf(x)/x) for x in xs])
print("erf P:", [float(f32(v)) for v in c])
err=0
for x in np.linspace(1e-6,E0,20001):
    x32=f32(x); z=f32(x32*x32); r=f32(x32*horner32([f32(v) for v in c],z))
    ref=mp.erf(float(x32)); e=abs(float(r)-float(ref))/float(np.spacing(np.float32(ref))); err=max(err,e)
print("erf small max ulp", err)
# ---- erf large: erfc(t) = exp(S(t) - t^2), S(t) = log(erfc(t)) + t^2, t in [E0, 4]
E1=4.0
xs=cheb_nodes(E0,E1,600)
tgt=[float(mp.log(mp.erfc(x))+x*x) for x in xs]
u=lambda x: (2*x-(E0+E1))/(E1-E0)   # map to [-1,1] for conditioning
deg=12
c=fit(xs,tgt,[lambda x,k=k: x**k for k in range(deg)],[1.0]*len(xs))
print("erf S (in t):", [float(v) for v in c])
err=0; worst=None
for x in np.linspace(E0,E1,40001):
    t=f32(x); s=horner32([f32(v) for v in c],t)
    hi=f32(t*t); lo=np.float64(t)*np.float64(t)-np.float64(hi)
    erfc=np.float32(np.exp(np.float64(f32(s-hi)))*(1-lo))
    r=f32(np.float32(1)-erfc)
    ref=mp.erf(float(t)); e=abs(float(r)-float(ref))/float(np.spacing(np.float32(ref)))
    if e>err: err=e; worst=float(t)
print("erf large max ulp", err, worst)
