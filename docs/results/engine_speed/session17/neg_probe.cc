// Session 17: what one negotiation round costs when the ranks are in step.
// A 16-byte MPI_BAND allreduce (the engine's cached negotiation) timed
// after a barrier, then the 1 MiB allreduce after it, against the 1 MiB
// allreduce after a barrier; slowest rank, medians of 380 iterations.
//   mpicxx -O2 neg_probe.cc -o neg_probe
//   OMPI_MCA_mpi_yield_when_idle=1 mpirun -np 4 --oversubscribe \
//     --bind-to none --mca btl self,vader,tcp ./neg_probe
// Printed on 2026-12-05: neg 5.2 / 5.1 / 6.2 us, neg+ar 480 / 485 / 499,
// ar 476 / 480 / 496 (three runs).
#include <mpi.h>
#include <vector>
#include <algorithm>
#include <cstdio>
#include <cstdint>
double med(std::vector<double> v){std::sort(v.begin(),v.end());return v[v.size()/2];}
int main(int argc,char**argv){
  MPI_Init(&argc,&argv); int r,n; MPI_Comm_rank(MPI_COMM_WORLD,&r); MPI_Comm_size(MPI_COMM_WORLD,&n);
  std::vector<float> buf(1<<18); uint64_t w[2]={~0ull,~0ull};
  std::vector<double> a,b,c; 
  for(int i=0;i<400;i++){
    MPI_Barrier(MPI_COMM_WORLD);
    double t0=MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE,w,2,MPI_UINT64_T,MPI_BAND,MPI_COMM_WORLD);
    double t1=MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE,buf.data(),buf.size(),MPI_FLOAT,MPI_SUM,MPI_COMM_WORLD);
    double t2=MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    double t3=MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE,buf.data(),buf.size(),MPI_FLOAT,MPI_SUM,MPI_COMM_WORLD);
    double t4=MPI_Wtime();
    double d[3]={t1-t0,t2-t0,t4-t3};
    MPI_Allreduce(MPI_IN_PLACE,d,3,MPI_DOUBLE,MPI_MAX,MPI_COMM_WORLD);
    if(i>=20){a.push_back(d[0]*1e6);b.push_back(d[1]*1e6);c.push_back(d[2]*1e6);}
  }
  if(r==0) printf("neg %.1f  neg+ar %.1f  ar %.1f us\n",med(a),med(b),med(c));
  MPI_Finalize();
}
