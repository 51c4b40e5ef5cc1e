#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <transformer/transformer.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  long B=atol(argv[1]),L=atol(argv[2]),D=atol(argv[3]),H=atol(argv[4]);int causal=argc>5;
  tfm_module*m;tfm_mha_create(D,H,0,0,1,&m);
  int64_t s[3]={B,L,D};tfm_tensor*x,*y;tfm_tensor_create(3,s,&x);tfm_tensor_create(3,s,&y);
  float*p=tfm_tensor_data(x);for(long i=0;i<B*L*D;i++)p[i]=(float)rand()/RAND_MAX-0.5f;
  int64_t ws[2]={3*D,D};tfm_tensor*w;tfm_tensor_create(2,ws,&w);float*q=tfm_tensor_data(w);for(long i=0;i<3*D*D;i++)q[i]=((float)rand()/RAND_MAX-0.5f)*0.1f;
  tfm_module_set_parameter(m,"in_proj_weight",w);
  tfm_attention_masks mk={.causal=causal?TFM_CAUSAL_TOP_LEFT:TFM_CAUSAL_NONE};
  double best=1e9;for(int r=0;r<7;r++){double t=now();tfm_mha_forward(m,x,x,x,&mk,y,NULL);t=now()-t;if(t<best)best=t;}
  printf("%.3f ms\n",best*1e3);return 0;}
