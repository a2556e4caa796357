# Fits the float32 polynomial for exp(r) on [-ln2/2, ln2/2] used by vec::exp (src/ops/kernels/vec.h)
# and reports the worst ULP error of the full exp over a dense grid (float32 emulation).
#   pip install numpy mpmath && python3 tools/mathfit/fit_float_exp.py
import numpy as np, mpmath as mp
mp.mp.dps=40
L=float(mp.log(2)/2)
k=np.arange(800); xs=np.cos((2*k+1)*np.pi/1600)*L
# e^r = 1 + r + r^2 * Q(r): fit Q with relative weighting
deg=5
tgt=[float((mp.exp(x)-1-x)/x**2) if abs(x)>1e-12 else 0.5 for x in xs]
w=[1/float(mp.exp(x)) for x in xs]
A=np.array([[x**j*x*x*wi for j in range(deg)] for x,wi in zip(xs,w)]); y=np.array([t*x*x*wi for t,x,wi in zip(tgt,xs,w)])
c,*_=np.linalg.lstsq(A,y,rcond=None)
print(', '.join('%.9ef'%v for v in c))
ln2hi=np.float32(0.693145751953125); ln2lo=float(mp.log(2))-float(ln2hi)
print('ln2hi %.17g ln2lo %.9e log2e %.9e'%(ln2hi, ln2lo, float(1/mp.log(2))))
f=np.float32; worst=0
cs=[f(v) for v in c]
for x in np.linspace(-87,88,200001):
    x=f(x); n=np.round(np.float64(x)*1.4426950408889634); n=f(n)
    r=f(f(x-f(n*ln2hi))-f(n*f(ln2lo)))
    q=cs[-1]
    for cc in cs[-2::-1]: q=f(f(q*r)+cc)
    p=f(f(f(r*r)*q)+r); p=f(p+f(1))
    val=np.float64(p)*2.0**float(n); ref=mp.exp(float(x))
    e=abs(val-float(ref))/float(np.spacing(np.float32(ref)))
    worst=max(worst,e)
print('worst ulp', worst)
