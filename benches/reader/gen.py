# Writes synthetic culprit sampler files (format version 3): gen.py ROOT RECORDS NODES.
import struct, zlib, os, sys
root=sys.argv[1]; n=int(sys.argv[2]); nodes=int(sys.argv[3])
T0=1704067200*10**9
def rec(kind, payload):
    payload += b'\0'*((-len(payload))%8)
    ln=16+len(payload)
    head=struct.pack('<HHII I', kind, 0, ln, 0, 0)
    crc=zlib.crc32(head[0:8]+head[12:16]+payload) & 0xffffffff
    return struct.pack('<HHIII', kind, 0, ln, crc, 0)+payload
for nd in range(nodes):
    d=os.path.join(root,f"n{nd}"); os.makedirs(d,exist_ok=True)
    out=bytearray()
    out+=rec(1,b"event=cpu-clock\nperiod=1000000\n")
    strs=b''
    for i,s in [(1,b'cpu-clock'),(2,b'prog'),(3,b'img'),(4,b'f'),(5,b'g')]:
        strs+=struct.pack('<II',i,len(s))+s+b'\0'*((-len(s))%8)
    out+=rec(5,strs)
    for i in range(n):
        ents=struct.pack('<IIIIQ',2,3,4,0,10+i%7)+struct.pack('<IIIIQ',2,3,5,0,5+i%3)
        fixed=struct.pack('<QQIIQQQII',T0+i*10**9,10**9,0,1,1000000,20,0,2,0)
        out+=rec(6,fixed+ents)
    hdr=bytearray(4096)
    committed=4096+len(out)
    struct.pack_into('<8sHHIIIQQQI',hdr,0,b'CULPRIT\0',3,2,128,2,1,4096,committed,T0,7)
    with open(os.path.join(d,f"samples-{T0}.cul"),'wb') as f:
        f.write(hdr); f.write(out)
